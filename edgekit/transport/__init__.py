"""Reaching devices. ssh.py is the only module that imports paramiko."""
