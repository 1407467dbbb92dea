# memtui: a stand-in for haliax, holding only haliax.util.StringHolderEnum (mixture.py's one import of it)
