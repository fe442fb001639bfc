"""Thin commands: parse, validate, call one entry point, render, map errors to exit codes.

Nothing outside ``cli`` imports it.
"""
