// Command kueue is the upstream Kueue controller for Rackplane's test suite
// (scripts/kube-testbed.sh kueue-start), built from the published
// sigs.k8s.io/kueue module. It is upstream's test/performance/scheduler/minimalkueue
// (core controllers, the scheduler, topology-aware scheduling) plus the
// batch/Job integration, and nothing that needs a certificate: no webhooks,
// no visibility server, no metrics or probe listeners. Kueue's own logic is
// not changed; only which of its controllers run is chosen here.
//
// With --config it reads a Kueue Configuration file (config.kueue.x-k8s.io/v1beta2,
// the one a Kueue installation keeps in its kueue-manager-config ConfigMap) and
// takes from it what cmd/kueue takes for the parts run here: the DRA device class
// mappings (resources.deviceClassMappings), wired into the workload controller
// and the queues exactly as cmd/kueue wires them.
//
// Without the webhooks the API server does not default or validate Kueue
// objects on their way in: Rackplane renders Jobs suspended and labelled with
// their LocalQueue, as the webhook would leave them, so the Job reconciler
// sees the same object it would see in a full installation.
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/go-logr/logr"
	zaplog "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuealpha "sigs.k8s.io/kueue/apis/kueue/v1alpha1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/core"
	"sigs.k8s.io/kueue/pkg/controller/core/indexer"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/controller/jobs/job"
	"sigs.k8s.io/kueue/pkg/controller/tas"
	tasindexer "sigs.k8s.io/kueue/pkg/controller/tas/indexer"
	"sigs.k8s.io/kueue/pkg/dra"
	"sigs.k8s.io/kueue/pkg/features"
	"sigs.k8s.io/kueue/pkg/resources"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	utildra "sigs.k8s.io/kueue/pkg/util/dra"
	"sigs.k8s.io/yaml"
)

var (
	scheme     = runtime.NewScheme()
	probeAddr  = flag.String("health-probe-bind-address", "0", "address of /healthz and /readyz (0: none)")
	configFile = flag.String("config", "", "a Kueue Configuration file (config.kueue.x-k8s.io/v1beta2); empty: the defaults")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kueue.AddToScheme(scheme))
	utilruntime.Must(kueuealpha.AddToScheme(scheme))
	utilruntime.Must(configapi.AddToScheme(scheme))
}

func main() {
	logOptions := zap.Options{
		TimeEncoder: zapcore.RFC3339NanoTimeEncoder,
		Level:       zaplog.NewAtomicLevelAt(zapcore.InfoLevel),
	}
	logOptions.BindFlags(flag.CommandLine)
	flag.Parse()
	log := zap.New(zap.UseFlagOptions(&logOptions))
	ctrl.SetLogger(log)
	os.Exit(run(log))
}

func run(log logr.Logger) int {
	// The defaults cmd/kueue starts from when its configuration file is empty.
	cfg := configapi.Configuration{}
	if *configFile != "" {
		data, err := os.ReadFile(*configFile)
		if err != nil {
			log.Error(err, "read the configuration file")
			return 1
		}
		if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
			log.Error(err, "parse the configuration file")
			return 1
		}
	}
	scheme.Default(&cfg)

	kubeConfig, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "get kubeconfig")
		return 1
	}
	kubeConfig.QPS = 50
	kubeConfig.Burst = 100

	options := ctrl.Options{
		Scheme: scheme,
		Controller: crconfig.Controller{
			GroupKindConcurrency: map[string]int{
				kueue.SchemeGroupVersion.WithKind("Workload").GroupKind().String():       5,
				kueue.SchemeGroupVersion.WithKind("LocalQueue").GroupKind().String():     1,
				kueue.SchemeGroupVersion.WithKind("ClusterQueue").GroupKind().String():   1,
				kueue.SchemeGroupVersion.WithKind("ResourceFlavor").GroupKind().String(): 1,
				kueue.SchemeGroupVersion.WithKind("Topology").GroupKind().String():       1,
			},
		},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: *probeAddr,
	}
	mgr, err := ctrl.NewManager(kubeConfig, options)
	if err != nil {
		log.Error(err, "create manager")
		return 1
	}

	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), ctrl.Log))
	defer cancel()
	go func() {
		done := make(chan os.Signal, 2)
		signal.Notify(done, syscall.SIGINT, syscall.SIGTERM)
		<-done
		cancel()
	}()

	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		log.Error(err, "core indexes")
		return 1
	}
	if err := tasindexer.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		log.Error(err, "TAS indexes")
		return 1
	}
	if err := job.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		log.Error(err, "Job indexes")
		return 1
	}

	// DRA: as cmd/kueue sets it up (KueueDRAIntegration is on by default from Kueue 0.18).
	resourceFormatter := resources.NewResourceFormatter()
	var draMapper *dra.ResourceMapper
	var draBackedResources *dra.ExtendedResourceCache
	if features.Enabled(features.KueueDRAIntegration) {
		draMapper = dra.NewResourceMapper()
		draBackedResources = dra.NewExtendedResourceCache()
		if cfg.Resources != nil && len(cfg.Resources.DeviceClassMappings) > 0 {
			if err := draMapper.PopulateFromConfiguration(cfg.Resources.DeviceClassMappings); err != nil {
				log.Error(err, "DRA device class mappings")
				return 1
			}
			log.Info("DRA mapper initialized from configuration", "mappings", len(cfg.Resources.DeviceClassMappings))
		}
	}

	cCache := schdcache.New(mgr.GetClient())
	requeuer := qcache.NewRequeuer()
	if err := mgr.Add(requeuer); err != nil {
		log.Error(err, "requeuer")
		return 1
	}
	expectations := preemptexpectations.New()
	queueOptions := []qcache.Option{qcache.WithPreemptionExpectations(expectations)}
	if draBackedResources != nil {
		queueOptions = append(queueOptions, qcache.WithDRABackedResources(draBackedResources))
	}
	queues := qcache.NewManager(mgr.GetClient(), cCache, requeuer, queueOptions...)
	go queues.CleanUpOnContext(ctx)
	go cCache.CleanUpOnContext(ctx)

	if name, err := core.SetupControllers(mgr, queues, cCache, &cfg,
		core.SetupControllersOpts{
			PreemptionExpectations:    expectations,
			DRAMapper:                 draMapper,
			DRABackedResources:        draBackedResources,
			ResourceFormatter:         resourceFormatter,
			ResourceSliceAPIAvailable: utildra.CheckResourceSliceAPIAvailable(mgr),
		}); err != nil {
		log.Error(err, "core controller", "controller", name)
		return 1
	}
	if name, err := tas.SetupControllers(mgr, queues, cCache, &cfg, nil); err != nil {
		log.Error(err, "TAS controller", "controller", name)
		return 1
	}
	reconciler, err := job.NewReconciler(ctx, mgr.GetClient(), mgr.GetFieldIndexer(),
		mgr.GetEventRecorder("batch/job-"+constants.KueueName+"-controller"),
		jobframework.WithManagerName(constants.KueueName),
		jobframework.WithCache(cCache),
		jobframework.WithQueues(queues),
		jobframework.WithEnabledFrameworks([]string{job.FrameworkName}),
	)
	if err != nil {
		log.Error(err, "Job reconciler")
		return 1
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		log.Error(err, "Job reconciler")
		return 1
	}

	sched := scheduler.New(queues, cCache, mgr.GetClient(), mgr.GetEventRecorder(constants.AdmissionName),
		scheduler.WithFairSharing(cfg.FairSharing),
		scheduler.WithPreemptionExpectations(expectations))
	if err := mgr.Add(sched); err != nil {
		log.Error(err, "scheduler")
		return 1
	}

	// Ready once the manager's caches have synced (its controllers start on the same caches).
	var started atomic.Bool
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			started.Store(true)
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		log.Error(err, "readiness")
		return 1
	}
	if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		log.Error(err, "healthz")
		return 1
	}
	if err := mgr.AddReadyzCheck("caches", func(*http.Request) error {
		if started.Load() {
			return nil
		}
		return errors.New("caches not synced yet")
	}); err != nil {
		log.Error(err, "readyz")
		return 1
	}

	log.Info("starting Kueue (core, scheduler, TAS, batch/Job)")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager")
		return 1
	}
	return 0
}
