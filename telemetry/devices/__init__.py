"""Device and host pollers: the sampler thread and its readers (host, NVML GPU, CUDA memory)."""
