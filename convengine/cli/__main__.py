from convengine.cli import main

main()
