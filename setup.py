"""The optional C extensions of the span path (everything else is in pyproject.toml): the meter's
``otel_joules.meter._fastsnap`` and the span ledger's ``otel_joules.attribution._fastledger``.

``optional=True``: where no C compiler is found the install goes on without them, and the span path
runs its pure-Python reference (``OTEL_JOULES_FAST_PATH=0`` selects that path anywhere).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "otel_joules.meter._fastsnap",
            sources=[
                "src/otel_joules/meter/_fastsnap.c",
                "src/otel_joules/meter/_fastsnap_snapshot.c",
                "src/otel_joules/meter/_fastsnap_interval.c",
                "src/otel_joules/meter/_fastsnap_fields.c",
                "src/otel_joules/meter/_fastsnap_attributes.c",
            ],
            depends=["src/otel_joules/meter/_fastsnap.h"],
            optional=True,
        ),
        Extension(
            "otel_joules.attribution._fastledger",
            sources=["src/otel_joules/attribution/_fastledger.c", "src/otel_joules/attribution/_fastledger_events.c"],
            depends=["src/otel_joules/attribution/_fastledger.h"],
            optional=True,
        ),
    ]
)
