"""The UI-free core, in packages by concern, each importing only the ones below it (an import-linter
contract holds the order; docs/architecture.md has the map). Bottom to top: `machine`, `telemetry`,
`launch`, `feed`, `supervise` and `sizing` (side by side), `fleet`, `record`, `export`, `session`.
Never imports Textual or rich."""
