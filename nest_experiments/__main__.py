from nest_experiments.cli import main

raise SystemExit(main())
