"""An enum whose members can be added at runtime (verl's ``DynamicEnum``).

``Dispatch`` and ``Execute`` are dynamic so that users can register their own dispatch modes
(``register_dispatch_mode``). Members pickle by *name*: a member registered only in the driver
is re-created on unpickling inside a Ray worker instead of failing the import there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar


class _DynamicEnumMeta(type):
    def __iter__(cls) -> Iterator[Any]:
        return iter(cls._registry.values())  # type: ignore[attr-defined]

    def __contains__(cls, item: object) -> bool:
        if isinstance(item, str):
            return item in cls._registry  # type: ignore[attr-defined]
        return item in cls._registry.values()  # type: ignore[attr-defined]

    def __getitem__(cls, name: str) -> Any:
        return cls._registry[name]  # type: ignore[attr-defined]

    def __len__(cls) -> int:
        return len(cls._registry)  # type: ignore[attr-defined]


class DynamicEnum(metaclass=_DynamicEnumMeta):
    """Base class: subclasses get their own registry; members are singletons per name."""

    _registry: ClassVar[dict[str, DynamicEnum]]
    _next_value: ClassVar[int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._registry = {}
        cls._next_value = 0

    def __init__(self, name: str, value: int) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_restore_member, (type(self), self.name))

    @classmethod
    def register(cls, name: str) -> DynamicEnum:
        """Add member ``name``; raise ``ValueError`` if it exists already."""
        if name in cls._registry:
            raise ValueError(f"{cls.__name__}.{name} is already registered")
        member = cls(name, cls._next_value)
        cls._next_value += 1
        cls._registry[name] = member
        setattr(cls, name, member)
        return member

    @classmethod
    def remove(cls, name: str) -> DynamicEnum:
        """Remove member ``name`` and return it."""
        member = cls._registry.pop(name)
        delattr(cls, name)
        return member

    @classmethod
    def from_name(cls, name: str) -> DynamicEnum | None:
        return cls._registry.get(name)


def _restore_member(cls: type[DynamicEnum], name: str) -> DynamicEnum:
    """Unpickle a member by name, registering it if this process has not seen it yet."""
    member = cls.from_name(name)
    return member if member is not None else cls.register(name)
