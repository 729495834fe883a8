"""tuner.profiles"""
