"""Hooks into user code that feed the recorder: torch.distributed collectives, DDP's comm hook, data loaders."""
