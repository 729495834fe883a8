"""tuner.hardware"""
