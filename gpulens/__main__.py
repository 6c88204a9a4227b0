from gpulens.cli.main import main

main()
