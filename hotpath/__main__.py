from hotpath.cli import main

raise SystemExit(main())
