from analyzer.cli import main

main(prog_name="kafkawire-sniff")
