# memtui: only what permutation.py and mixture.py import from levanter.data (the real one imports the loader,
# sharded sources and text datasets); see ../../README.md
from .dataset import AsyncDataset, ListAsyncDataset, MappedAsyncDataset, SyncDataset

__all__ = ["AsyncDataset", "ListAsyncDataset", "MappedAsyncDataset", "SyncDataset"]
