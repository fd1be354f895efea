// The etcd server, built from the go.etcd.io/etcd/server/v3 module that Kubernetes itself
// requires (realplane/pins.toml). docs/realplane.md says why it is built here.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
