"""Stand-in of ``vllm.v1.attention.backends.registry`` (vLLM 0.33.0): the custom-backend registry."""

import enum
import importlib
from typing import Callable, Dict, Optional, Union


class AttentionBackendEnum(enum.Enum):
    FLASHMLA_SPARSE = "vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseBackend"
    CUSTOM = None

    @classmethod
    def register(cls, name: str, value: str) -> "AttentionBackendEnum":
        if name in cls._member_map_:
            raise ValueError(f"Backend {name} already exists in {cls.__name__}.")
        member = object.__new__(cls)
        member._name_ = name
        member._value_ = value
        setattr(cls, name, member)
        cls._member_map_[name] = member
        cls._value2member_map_[value] = member
        cls._member_names_.append(name)
        return member

    def get_path(self, include_classname: bool = True) -> str:
        path = _ATTN_OVERRIDES.get(self, self.value)
        if not path:
            raise ValueError(f"Backend {self.name} must be registered before use.")
        return path if include_classname else path.rsplit(".", 1)[0]

    def get_class(self):
        module, name = self.get_path().rsplit(".", 1)
        return getattr(importlib.import_module(module), name)


_ATTN_OVERRIDES: Dict[AttentionBackendEnum, str] = {}


def register_backend(backend: Union[AttentionBackendEnum, str], class_path: Optional[str] = None,
                     is_mamba: bool = False) -> Callable[[type], type]:
    if isinstance(backend, str):
        backend = AttentionBackendEnum.register(backend, class_path or "")

    def decorator(cls: type) -> type:
        _ATTN_OVERRIDES[backend] = f"{cls.__module__}.{cls.__qualname__}"
        return cls

    if class_path is not None:
        _ATTN_OVERRIDES[backend] = class_path
        return lambda x: x
    return decorator
