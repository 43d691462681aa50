"""``model.attn_implementation``: the attention every model of a stage runs, checked before any
weight is read.

transformers picks the attention kernel when a model is built (``attn_implementation`` of
``from_pretrained``). Its own failures come late or not at all: flash-attention without the
``flash_attn`` package falls back to a hub download when the ``kernels`` package is there, an
fp32 model under flash-attention fails at its first forward, and a model class without an
implementation is a ValueError deep in loading. So tether checks the choice itself, each check
where its facts are known: the package and the device with the stage's engine settings
(:func:`check_attention`, before inputs are read), the model class with the checkpoint's config
(:func:`resolve`, before its weights); a ValueError transformers still raises at load is
reworded by :func:`load_error`. Each is one paragraph naming the key.
"""

from __future__ import annotations

import importlib.util
import logging

from tether.errors import ConfigError

log = logging.getLogger(__name__)

KEY = "model.attn_implementation"
CHOICES = ("sdpa", "eager", "flash_attention_2", "flex_attention")
#: The class attribute by which a transformers model declares each implementation (eager: all do).
_SUPPORT_FLAGS = {"sdpa": "_supports_sdpa", "flash_attention_2": "_supports_flash_attn",
                  "flex_attention": "_supports_flex_attn"}


def flex_attention_available() -> bool:
    """This torch has ``torch.nn.attention.flex_attention`` (torch >= 2.5)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def package_installed(package: str) -> bool:
    """``package`` can be imported here (found without importing it)."""
    return importlib.util.find_spec(package) is not None


def check_installed(name: str, key: str = KEY) -> None:
    """The package ``name`` runs on is importable: ``flash_attn`` for flash_attention_2, a torch
    with flex_attention for flex_attention (sdpa and eager need nothing beyond torch)."""
    if name == "flash_attention_2" and not package_installed("flash_attn"):
        raise ConfigError(
            f"Config key '{key}' = 'flash_attention_2', but the flash_attn package is not installed in this "
            "environment. Install it on a CUDA machine (pip install flash-attn --no-build-isolation), or choose "
            f"{key}=sdpa (the default, also fast on GPUs) or eager."
        )
    if name == "flex_attention" and not flex_attention_available():
        import torch

        raise ConfigError(
            f"Config key '{key}' = 'flex_attention', but this torch ({torch.__version__}) has no "
            "torch.nn.attention.flex_attention (it needs torch 2.5 or newer). Upgrade torch, or choose "
            f"{key}=sdpa (the default) or eager."
        )


def check_attention(name: str, device, dtype: str = "float32", precision: str = "fp32", key: str = KEY) -> None:
    """``name`` can run here: its package is installed (:func:`check_installed`) and, for
    flash_attention_2, the stage runs on CUDA in half precision (flash-attention has no CPU or MPS
    kernel and computes in fp16/bf16 only: ``model.dtype`` bfloat16/float16 or ``run.precision``
    bf16/fp16). ``device``: the stage's resolved ``torch.device``."""
    if name not in CHOICES:
        raise ConfigError(f"Config key '{key}' = {name!r}: expected one of {', '.join(CHOICES)}.")
    check_installed(name, key)
    if name != "flash_attention_2":
        return
    if device.type != "cuda":
        raise ConfigError(
            f"Config key '{key}' = 'flash_attention_2' with the stage on {device} (run.device): flash-attention "
            f"runs on CUDA GPUs only. Run on a GPU (run.device=cuda), or choose {key}=sdpa or eager."
        )
    if dtype == "float32" and precision == "fp32":
        raise ConfigError(
            f"Config key '{key}' = 'flash_attention_2' with model.dtype = float32 and run.precision = fp32: "
            "flash-attention computes in fp16/bf16 only. Set run.precision=bf16 (fp32 master weights, "
            f"bf16 autocast) or model.dtype=bfloat16, or choose {key}=sdpa."
        )


def supported(model_class) -> list[str]:
    """The implementations (of :data:`CHOICES`) ``model_class`` declares, eager first."""
    return ["eager", *(name for name, flag in _SUPPORT_FLAGS.items() if getattr(model_class, flag, False))]


def model_class(auto_class, config):
    """The class ``auto_class`` (``AutoModelForCausalLM``, ...) builds for ``config``, or None
    when it is not in transformers' table (custom code: known only once its code is imported)."""
    try:
        return auto_class._model_mapping[type(config)]
    except (KeyError, AttributeError):
        return None


def resolve(name: str, cls, named: str, key: str = KEY) -> str | None:
    """The implementation to pass to ``from_pretrained`` for a model of class ``cls``: ``name``
    when the class declares it; one it does not is a ConfigError naming ``key``, the model
    (``named``) and what the class supports. sdpa, the default, is the exception: a class
    without it runs eager, as transformers' own default does, said on stderr. ``cls`` None (a
    class known only once custom code is imported): ``name`` as asked, transformers checking it
    at load, and None for sdpa (transformers' default: sdpa, else eager)."""
    check_installed(name, key)
    if cls is None:  # custom code: transformers checks at load (sdpa: None, its default, eager without it)
        return None if name == "sdpa" else name
    have = supported(cls)
    if name in have:
        return name
    if name == "sdpa":
        log.warning("%s has no sdpa attention (%s): it runs eager attention.", named, cls.__name__)
        return "eager"
    raise unsupported(name, named, cls.__name__, have, key)


def unsupported(name: str, named: str, class_name: str | None, have: list[str] | None, key: str = KEY,
                reason: str = "") -> ConfigError:
    """The error for ``name`` on a model whose class does not support it (``have``: what the
    class supports, when known; ``reason``: transformers' own words, when the class is not)."""
    what = f", a {class_name}," if class_name else ""
    options = f"; it supports {', '.join(have)}. Set {key} to one of those" if have else \
        f"{f' (transformers: {reason})' if reason else ''}. Set {key} to another (sdpa or eager)"
    return ConfigError(
        f"Config key '{key}' = {name!r}: the model {named}{what} does not support this attention "
        f"implementation{options}."
    )


def load_error(err: Exception, name: str, named: str, cls, key: str = KEY) -> ConfigError | None:
    """``err`` from ``from_pretrained`` reworded when it is about the attention implementation
    (transformers raises a ValueError or an ImportError naming it), else None."""
    from tether.errors import one_line

    text = str(err)
    if name == "sdpa":  # the default never fails at load for its attention (a class without it runs eager)
        return None
    if not isinstance(err, (ValueError, ImportError)) or not ("attention" in text.lower() or "attn_" in text):
        return None
    if cls is not None:
        return unsupported(name, named, cls.__name__, supported(cls), key)
    return unsupported(name, named, None, None, key, one_line(text, 300).rstrip("."))
