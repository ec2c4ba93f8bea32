"""Emulated devices for tests and demos: real OpenSSH servers on 127.0.0.x, x86_64 (with Mesa's
software Vulkan) or aarch64 (a Debian arm64 userland under qemu user-mode emulation)."""
