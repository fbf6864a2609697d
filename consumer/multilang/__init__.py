"""A KCL MultiLangDaemon without a JVM: ``python -m consumer multilang app.properties``."""
