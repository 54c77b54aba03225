"""The project's own benchmark harness (`bench/run.py`): a fast mock provider, a bare aiohttp
forwarder (the floor of a Python proxy), a loopback OTLP sink, a closed-loop load driver and
the report. Each server runs as its own process so its CPU per request can be read from /proc.
"""
