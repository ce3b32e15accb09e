"""BenevDial: benevolent bias in multi-turn support dialogues."""
