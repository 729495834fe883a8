"""tuner.calibration"""
