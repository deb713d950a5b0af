"""One module per verb of the `cockpit` command line (run, attach, presets, recommend, tune, report,
fleet, export), and `pod`, the container's entrypoint (`cockpit-pod`); they never import each other.
`console` is their shared helper, `plots` and `htmlreport` report's own. `run`, `fleet` and
`attach` parse, call `cockpit.core.session.start` (the front door) with a front end, and present."""
