from evalx.cli import main

main()
