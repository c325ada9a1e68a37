"""The optional C extension ``otel_joules.meter._fastsnap`` (everything else is in pyproject.toml).

``optional=True``: where no C compiler is found the install goes on without it, and the span path
runs its pure-Python reference (``OTEL_JOULES_FAST_PATH=0`` selects that path anywhere).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "otel_joules.meter._fastsnap",
            sources=["src/otel_joules/meter/_fastsnap.c"],
            optional=True,
        )
    ]
)
