"""The UI-free core: supervisor, telemetry, advisor and run log. Never imports Textual."""
