// reflectors runs client-go's informers, every default kept (the reflector's backoff, the client's 5
// requests a second with bursts of 10, a watch-list where the API server serves one), over the objects
// our service watches: RootSyncs, RepoSyncs and ResourceGroups of one namespace. It is the yardstick of
// the API-fault benchmark (profiles/api_faults.py), not part of the product: what client-go asks of an
// API server in trouble, through the same fault proxy as our service.
//
// build_reflectors.sh builds it inside the extracted source of the pinned Config Sync release, with that
// release's vendored client-go; nothing of Config Sync's is copied into this repository.
//
//	reflectors -kubeconfig FILE -namespace NS
//
// Until SIGTERM, one JSON line on standard output per object added or changed in the informers' stores:
// {"resource": "resourcegroups", "name": "...", "resourceVersion": "...", "at": UNIX_SECONDS}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

var watched = []schema.GroupVersionResource{
	{Group: "configsync.gke.io", Version: "v1beta1", Resource: "rootsyncs"},
	{Group: "configsync.gke.io", Version: "v1beta1", Resource: "reposyncs"},
	{Group: "kpt.dev", Version: "v1alpha1", Resource: "resourcegroups"},
}

type seen struct {
	Resource        string  `json:"resource"`
	Name            string  `json:"name"`
	ResourceVersion string  `json:"resourceVersion"`
	At              float64 `json:"at"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to reach the API server with")
	namespace := flag.String("namespace", "", "the namespace watched")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reflectors:", err)
		os.Exit(2)
	}
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reflectors:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var out sync.Mutex
	encoder := json.NewEncoder(os.Stdout)
	tell := func(resource string, object interface{}) {
		u, ok := object.(*unstructured.Unstructured)
		if !ok {
			return
		}
		out.Lock()
		defer out.Unlock()
		now := float64(time.Now().UnixNano()) / 1e9
		_ = encoder.Encode(seen{resource, u.GetName(), u.GetResourceVersion(), now})
	}
	for _, gvr := range watched {
		objects := client.Resource(gvr).Namespace(*namespace)
		informer := cache.NewSharedIndexInformer(
			&cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
					return objects.List(ctx, options)
				},
				WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
					return objects.Watch(ctx, options)
				},
			},
			&unstructured.Unstructured{},
			0,
			cache.Indexers{},
		)
		resource := gvr.Resource
		_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(object interface{}) { tell(resource, object) },
			UpdateFunc: func(_, object interface{}) { tell(resource, object) },
		})
		go informer.RunWithContext(ctx)
	}
	<-ctx.Done()
}
