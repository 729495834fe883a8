"""tuner.ui"""
