"""PySpark data source ``appliance``: read topics in place from the segment files (mmap, Arrow),
stream them with Structured Streaming, and write DataFrames to topics through the broker.

See ``spark/README.md``. Importing this package needs pyspark (the ``spark`` extra).
"""

from spark.datasource import ApplianceBatchReader, ApplianceDataSource, ApplianceStreamReader
from spark.session import session

__all__ = ["ApplianceDataSource", "ApplianceBatchReader", "ApplianceStreamReader", "session"]
