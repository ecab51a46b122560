"""Benchmarks and WAN emulation: tools run beside training, never by a training pod."""
