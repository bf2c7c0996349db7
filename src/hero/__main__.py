from hero.cli import main

raise SystemExit(main())
