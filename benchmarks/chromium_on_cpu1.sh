#!/bin/sh
# Chromium pinned to CPU 1, so the benchmark's browser never shares the server's CPU 0.
exec taskset -c 1 /usr/bin/chromium "$@"
