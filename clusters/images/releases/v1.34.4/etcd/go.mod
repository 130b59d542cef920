// Wrapper module: builds etcd and etcdctl from the module proxy. Their own go.mod files
// point sibling modules at ../ with replace directives, which only hold in etcd's repository.
module kdrill.local/build/etcd

go 1.24

require (
	go.etcd.io/etcd/api/v3 v3.6.5
	go.etcd.io/etcd/client/pkg/v3 v3.6.5
	go.etcd.io/etcd/client/v3 v3.6.5
	go.etcd.io/etcd/etcdctl/v3 v3.6.5
	go.etcd.io/etcd/pkg/v3 v3.6.5
	go.etcd.io/etcd/server/v3 v3.6.5
)
