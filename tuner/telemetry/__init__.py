"""tuner.telemetry"""
