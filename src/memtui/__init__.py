"""memtui: causal estimation of memorisation profiles (Lesci et al., ACL 2024)."""

__version__ = "0.1.0"
