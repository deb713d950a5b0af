"""One module per verb of the `cockpit` command line (run, attach, presets, recommend, tune, report,
fleet, export), and `pod`, the container's entrypoint (`cockpit-pod`); they never import each other.
`console` and `frontends` are their shared helpers, `plots` and `htmlreport` report's own."""
