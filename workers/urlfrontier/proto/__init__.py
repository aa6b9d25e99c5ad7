"""Generated gRPC stubs of the URLFrontier 2.6 API (generate.sh); not edited by hand."""
