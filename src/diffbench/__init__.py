"""diffbench: measure, plan and prove inference optimizations for diffusion models.

Importing this package is cheap: it never imports torch, diffusers or an HTTP client.
Heavy dependencies are imported inside the engine or metric that needs them.
"""

from diffbench.errors import DiffbenchError

__version__ = "0.1.0"
__all__ = ["DiffbenchError", "__version__"]
