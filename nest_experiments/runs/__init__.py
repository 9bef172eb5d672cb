"""Running experiments: choosing and entering a runtime, a sweep's runs (the runner), the cluster, running
until the claims are decided, the doctor. Orchestration: imports the config, the system seam (net/), apps,
collectors and the VM; nothing imports it but the command line (and the pytest plugin)."""
