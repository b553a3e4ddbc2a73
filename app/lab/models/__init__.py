"""Model files read from disk: a config.json into a ModelConfig (config_json, config_fields) and a
local Hugging Face directory into a LoadedModel for the real runner (loader)."""
