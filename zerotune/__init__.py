"""zerotune: tune and validate DeepSpeed ZeRO configurations before launch."""

__version__ = "0.1.0"
__all__ = ["__version__"]
