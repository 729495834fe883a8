"""tuner.server"""
