"""The Textual cockpit: `app` (the app and its factory), one module per screen and per widget, and
one stylesheet, `cockpit.tcss`.

- `app`: the app over one run's `RunSource`, or the start screen, made by `make_app()`;
- screens: `start_screen` (bare `cockpit`), `opener` (what its form starts or reopens),
  `cockpit_screen` (the main screen), `detail_screen` (a job's detail), `fleet_screen`,
  `report_screen`, `help_screen`, `quit_screen`, and `reused_screen` (a screen pushed again and
  again without a restyle each time);
- widgets: `gpu_panel`, `cpu_panel`, `trend_panel`, `advice_panel`, `jobs_table`, `replay_bar`,
  `footer` (the key bar), `lines_widget` (a widget drawn line by line);
- `timeaxis`: pure: the buckets and bars the time-aligned panels share.
"""
