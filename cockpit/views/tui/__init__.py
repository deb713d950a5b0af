"""The Textual cockpit: `app` (the app and its factory), one module per screen (`start_screen`,
`cockpit_screen`, `detail_screen`, `fleet_screen`, `help_screen`, `quit_screen`) and per widget,
and one stylesheet, `cockpit.tcss`."""
