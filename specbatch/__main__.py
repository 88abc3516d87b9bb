from specbatch.cli import main

raise SystemExit(main())
