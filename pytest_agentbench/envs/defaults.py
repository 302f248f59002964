"""The environments' defaults, which their options declare: a leaf module, so that declaring the options (in every
pytest run) imports no environment."""

from __future__ import annotations

DEFAULT_IMAGE = "python:3.12-bookworm"
DEFAULT_NETWORK = "bridge"
HOST_NETWORKS = ("user", "none")  # --bench-set host_network: outbound through slirp4netns, or no network at all
DEFAULT_COPY_OUT_CAP = 1 << 30  # bytes; the same as a command's largest file (RLIMIT_FSIZE)
