# memtui: empty, so that importing levanter.data does not import the trainer (see ../README.md)
