"""Core: clock and sync protocol, statistics, typed records. Imports only stdlib, numpy, pydantic."""
