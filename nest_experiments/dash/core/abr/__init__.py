"""The ABR algorithms: :mod:`.base` (the player state, the decision, the base class), one module per algorithm, and
:mod:`.registry` (every algorithm by name; :func:`~.registry.create_abr`). This ``__init__`` imports nothing, so
that :data:`.base.DEFAULT_ABR` costs no algorithm (numpy) to read."""
