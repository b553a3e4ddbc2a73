"""Icons, themes and fonts, found through importlib.resources like the presets."""
