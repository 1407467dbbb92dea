# memtui: haliax's StringHolderEnum, the one name levanter/data/mixture.py imports from haliax: a class whose string
# attributes are its members, so that ``"restart" in StopStrategy`` holds


class StringHolderEnum(type):
    def __new__(mcs, name, bases, namespace):
        cls = super().__new__(mcs, name, bases, namespace)
        cls._members = [v for k, v in namespace.items() if not k.startswith("__") and isinstance(v, str)]
        return cls

    def __contains__(cls, item):
        return item in cls._members

    def __iter__(cls):
        return iter(cls._members)
