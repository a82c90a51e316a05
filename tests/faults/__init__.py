"""The fault suite (``make faults``): real processes, sockets, servers and file systems."""
