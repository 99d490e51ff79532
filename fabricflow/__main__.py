from fabricflow.cli import main

main()
