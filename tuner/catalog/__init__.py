"""tuner.catalog"""
