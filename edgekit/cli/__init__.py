"""Thin commands: parse, call one edgekit function, render. See main.py."""
