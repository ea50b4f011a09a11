package testenv

import "os"

var verbose = os.Getenv("REEVE_TEST_LOG") != ""
