// Command dispatcher takes run specs and emits episode requests with
// admission control. See README.md.
package main

import "github.com/medgym/medgym/services/dispatcher/dispatcher"

func main() { dispatcher.Binary.Main() }
